"""What ``tinymem plan`` shows: its flags by mode (:mod:`.arguments`), each mode's run, the table
and ``--explain`` (:mod:`.command`), and the calibrated time model that ranks what fits
(:mod:`.timing`)."""
