"""The review side: perflogs -> store -> verdicts -> reports and exports.

Never imports ``fabreg.run``, ``fabreg.testlib`` or ReFrame (``tests/test_layers.py``): it reads
what the checks logged, never the benchmarks' text.
"""
