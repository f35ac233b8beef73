"""Memory-saving techniques, one file per technique; each plugs into one seam of the engine."""
