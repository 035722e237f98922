"""Migration: the index's schema steps and the files' layout steps, applied lazily."""
