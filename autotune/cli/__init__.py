"""The ``autotune`` command line: ``command`` (the parser and ``main``), one module per command
(``show``, ``explain``, ``synthetic``, ``report``) and ``common`` (one error line, one ``--db``)."""
