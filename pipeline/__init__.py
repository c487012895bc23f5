"""pipeline: many satellite tiles in, one analysis-ready Zarr datacube out.

Data flow, one module per stage::

    config -> catalog -> grid -> plan -> (read -> resample -> write) per task -> report
                                         \\_ execute wires the tasks onto Dask _/
"""

__version__ = "0.1.0"
