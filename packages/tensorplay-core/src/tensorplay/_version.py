# The single source of the version shared by every TensorPlay distribution.
# tools/release/version.py rewrites this line; each distribution's build reads it.
__version__ = "0.1.0"
