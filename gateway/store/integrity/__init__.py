"""Integrity: verify, check, repair, scrub, and whether a file is safe."""
