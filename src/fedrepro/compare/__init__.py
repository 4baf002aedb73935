"""A method from outside the package under the papers' protocols (``python -m fedrepro compare FILE:CLASS``).

method_file: load the user's Algorithm subclass and guard its training; protocol: run it beside the paper's methods
(rebuilt, or read from the workflow's runs) over paired seeds; paired: the differences to each baseline with their
standard errors; table: the experiment's table with the method as one more row (Markdown, CSV, figure)."""
