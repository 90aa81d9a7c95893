"""Django finds each command here by its module's name."""
