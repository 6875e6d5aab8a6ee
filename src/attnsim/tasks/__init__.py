"""Tasks from the paper's discussion: Match2 and k-PARITY as hard-attention RASP programs.

>>> from attnsim import rasp, tasks
>>> rasp.evaluate(tasks.match2.match2(5), [1, 4, 2])
[1, 1, 0]
"""

from attnsim.tasks import match2, parity

__all__ = ["match2", "parity"]
