"""The version of tinymem, readable by every layer without importing the package."""
__version__ = "0.1.0"
