"""The course as students and teachers use it: ``tinymem course build`` (each lesson executed
once as a notebook, :mod:`.execute`, rendered as a static site, :mod:`.site`; what a lesson
displays inside a notebook kernel, :mod:`.kernel`) and ``tinymem course grade``
(:mod:`tinymem.course.grade`, the exercise checks over a class)."""
import importlib.util

# The modules of the `course` extra (pyproject.toml) that executing and rendering need.
PACKAGES = {"jupytext": "jupytext", "nbclient": "nbclient", "nbformat": "nbformat", "ipykernel": "ipykernel",
            "sphinx": "sphinx", "myst_nb": "myst-nb"}


def missing_packages(modules=PACKAGES):
    """The pip names of the course's packages that are not installed (none: the list is empty).
    Looked up without importing them."""
    return [name for module, name in modules.items() if importlib.util.find_spec(module) is None]
