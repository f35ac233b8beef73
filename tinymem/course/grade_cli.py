"""The ``tinymem course grade`` command line (the work is :func:`tinymem.course.grade.grade`)."""
import argparse
import sys

DESCRIPTION = """\
Run the exercise checks (tests/exercises/, as `pytest -m exercise_NN` runs them) over a class.
SUBMISSIONS holds one folder per student, each laid out as the course:
STUDENT/lessons/exercises/exNN.py (other files in it are ignored; a folder without
lessons/exercises/ gets a row saying so). Each student is checked in a separate process on a
scratch copy of their files, with a time limit, a memory limit and capped output, against the
tinymem of this checkout (it must be run from a clone: `pip install -e .`).

The CSV has one row per student: a column per exercise file (passed | failed: <check>:
<first failing assertion> | error: <check>: <exception line> | timeout) and notes."""

EPILOG = """\
Isolation, honestly: the checks run as your user. Where Linux has Landlock (5.13+, most
distributions since 2022) a student's process may change files only inside its scratch copy (and /dev/shm);
elsewhere it can write or delete anything you can. The course's own files (lessons/, tests/,
tinymem/) are compared after each student and restored if changed (named in the notes). A
student's code can still read your files, use the network, start processes and forge its own
row. This is not a security sandbox: grade untrusted code as a separate user or in a container."""


def add_parser(actions):
    grade = actions.add_parser("grade", help="run the exercise checks over a class's submissions, write a CSV",
                               description=DESCRIPTION, epilog=EPILOG,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    grade.add_argument("submissions", metavar="SUBMISSIONS", help="a folder holding one folder per student")
    grade.add_argument("--out", required=True, help="the CSV to write (e.g. grades.csv)")
    grade.add_argument("--html", default=None, help="also write a short HTML summary here")
    grade.add_argument("--timeout", type=float, default=120.0,
                       help="wall-clock seconds for the checks of one exercise file, from its first check "
                            "(default 120); past it that exercise is 'timeout' and the student's later ones run "
                            "in a fresh process")
    grade.add_argument("--memory", type=int, default=4096,
                       help="address-space limit per student in MB (default 4096)")
    grade.add_argument("--only", default=None, metavar="NN,NN",
                       help="only these lessons' exercises, e.g. 00,05 (default: all)")
    grade.add_argument("--jobs", type=int, default=1, help="students checked side by side (default 1)")
    grade.set_defaults(fn=run)


def run(args):
    from .grade import grade
    from .grade_landlock import abi_version

    only = args.only.split(",") if args.only is not None else None
    if abi_version() < 1:
        print("tinymem course grade: this kernel has no Landlock, so a submission's code can write and delete "
              "anything your user can (see --help)", file=sys.stderr)
    try:
        rows = grade(args.submissions, args.out, html=args.html, timeout=args.timeout, memory_mb=args.memory,
                     only=only, jobs=args.jobs)
    except ValueError as exc:
        print(f"tinymem course grade: {exc}", file=sys.stderr)
        return 2
    print(f"{len(rows)} students graded: {args.out}" + (f", {args.html}" if args.html else ""))
    return 0
