"""The pieces of ``benchmarks/report.py`` (the entry point), by concern: ``fmt`` (numbers and
markdown tables), ``provenance`` (command, hardware, jax version and revision of a results
file), ``revision`` (git: whether the code a table measures changed since its revision),
``code`` (which code each results file measures: the one place that says so), ``learners`` and
``tables`` (the renderers)."""
