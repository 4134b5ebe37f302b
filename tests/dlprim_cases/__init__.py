"""DLPrimitives' operator test cases, generated from PyTorch and run against dlprim's layers.

DLPrimitives checks every operator with JSON files of test cases (``tests/test_case_*.json``
made by its ``make_test_cases_from_pt.py``, run by ``test_from_template.cpp``). This package
makes files of the same structure and runs them by the same rules:

- ``torch_reference``: each operator, given its JSON options, as a PyTorch CPU function
  (float64), shared by the generator and by cases whose reference is computed at run time;
- ``generate_ops`` / ``generate_conv``: the test files, operator by operator, with the
  original's options, shapes and per-case tolerances (``generate.generate`` picks one);
- ``runner``: setup (output and parameter specs), forward, input and parameter gradients,
  the second, accumulating backward pass, and the original's tolerance rule.

tests/README.md says how to run them and how to widen the sizes.
"""
