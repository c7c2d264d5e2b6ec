"""fabreg: regression and acceptance testing for HPC interconnects."""

__version__ = "0.1.0"
