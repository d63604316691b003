"""Stage 7, results: what a user holds after planning.

``plan.py`` the Plan of one budget; ``planfile.py`` its file on disk (save / load_plan);
``plots.py`` its pictures; ``report/`` its report (the data model and one renderer per
format).
"""
