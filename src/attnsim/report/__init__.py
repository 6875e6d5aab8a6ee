"""Reports: resource tables and plots built on the compiled models.

- :mod:`attnsim.report.matrix_table`: the matrix programs' compiled resources next to the
  paper's counts (``attnsim report matrix``);
- :mod:`attnsim.report.simulator_table`: the universal simulator's resources;
- :mod:`attnsim.report.plots`: figures.

The modules are imported where they are used (each pulls in the compiler), so importing this
package costs nothing:

>>> from attnsim.report import matrix_table
>>> matrix_table.paper_counts(matrix_table.Case("transpose", (2, 3)))
(2, [1, 1])
"""
