"""The test folders are not packages, so pytest imports each test file by its basename: two files
of one name in two folders stop the collection of the whole suite ("import file mismatch")."""
import collections
import pathlib

TESTS = pathlib.Path(__file__).resolve().parent


def test_every_test_file_has_a_name_of_its_own():
    by_name = collections.defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        by_name[path.name].append(str(path.relative_to(TESTS)))
    assert {name: paths for name, paths in by_name.items() if len(paths) > 1} == {}
