"""The simulation report (``gpufleet simulate --report DIR``): :mod:`.build` makes the report as blocks (tables,
bullets, figures) and its Markdown; :mod:`.html` and :mod:`.plots` draw its HTML page and PNG plots from those
blocks; :mod:`.files` writes them into the folder.
"""
