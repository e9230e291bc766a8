"""Nodes checked before they are trusted: a short compute, memory and link check on every
node a study may run on (`worker.py`, launched like a trial by `check.py`), and a verdict
that names a node well outside its peers (`judge.py`), kept out of the study's trials."""
