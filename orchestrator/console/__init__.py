"""``action=console``: a web console of the runs under home, served on this machine.

Server-rendered pages (Starlette, Jinja2 with autoescape) of what ``action=list``,
``action=status`` and ``action=report`` already read from each run's folder, a JSON API
the pages' small script polls to stay live, plots drawn here with matplotlib, and the
guarded stop, cancel and drill of ``action=stop``, ``action=cancel`` and ``action=drill``.
Every path needs the token the command prints (``security``); nothing from a journal is
ever trusted as markup.
"""
