"""ipywidgets views over traces and runs (issue: views and widgets).

The only layer (with ``magics``) allowed to import ipywidgets.
"""
