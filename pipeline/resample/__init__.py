"""Pure array kernels, one implementation for NumPy and CuPy (``xp``).

Nothing geospatial is imported here: no rasterio, pyproj, dask, zarr or
xarray. Callers hand in arrays and plain numbers.
"""

from pipeline.resample.fuse import FirstValid, fuse_arrays, valid_mask
from pipeline.resample.kernels import KERNEL_METHODS, CoordMap, resample

__all__ = ["KERNEL_METHODS", "CoordMap", "FirstValid", "fuse_arrays", "resample", "valid_mask"]
