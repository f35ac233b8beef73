"""The course as it is read: each lesson executed once as a notebook (:mod:`.execute`), the
notebooks rendered as a static site (:mod:`.site`), and what a lesson displays inside a notebook
kernel (:mod:`.kernel`). ``tinymem course build`` runs them (:mod:`.build`)."""
import importlib.util

# The modules of the `course` extra (pyproject.toml) that executing and rendering need.
PACKAGES = {"jupytext": "jupytext", "nbclient": "nbclient", "nbformat": "nbformat", "ipykernel": "ipykernel",
            "sphinx": "sphinx", "myst_nb": "myst-nb"}


def missing_packages(modules=PACKAGES):
    """The pip names of the course's packages that are not installed (none: the list is empty).
    Looked up without importing them."""
    return [name for module, name in modules.items() if importlib.util.find_spec(module) is None]
