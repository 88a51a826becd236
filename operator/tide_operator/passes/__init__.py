"""One pass, assembled: sensors read, the pure control step decides, effects act, status is written."""
