"""The ``manage.py`` commands of the simpleworkflow Django app."""
