"""The one exception type the CLI turns into a single line and exit code 2."""


class UserError(ValueError):
    """Bad input: the message says what, where and what was expected, in one line."""
