"""LLM model/hardware co-design explorer.

Data flows one way: YAML specs -> frozen specs -> design arrays -> simulator -> results table
-> frontier -> report/CLI.  The library is usable without the CLI::

    from explorer.api import evaluate
    r = evaluate(model="llama-3.1-8b", hardware="h200", batch=1, isl=1024, osl=1024)
"""

__version__ = "0.1.0"
