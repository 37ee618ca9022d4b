"""Runnable examples of Spark jobs on kraftlite."""
