"""The course as students and teachers use it: ``tinymem course build`` (the rendered lessons)
and ``tinymem course grade`` (:mod:`tinymem.course.grade`, the exercise checks over a class)."""
