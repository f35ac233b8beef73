"""Wrong answer to 07.4: the library's formula imported instead of derived."""
from tinymem.distributed.pipeline import bubble_fraction  # noqa: F401

TARGET = "bubble_fraction"
