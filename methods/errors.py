"""One exception type for every user-facing error, so entry points can print it cleanly."""


class HarnessError(Exception):
    """A problem with the user's config, data or files; the message says what and where."""


def first_line(exc: BaseException) -> str:
    """Library errors (torch.load) can span many lines; a message needs the first."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
