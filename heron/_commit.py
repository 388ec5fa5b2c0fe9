"""The commit this tree was exported from.

``git archive`` (a release tarball, a code snapshot a benchmark runs from) fills the placeholder below in,
because ``.gitattributes`` marks this file ``export-subst``; in a checkout it stays a placeholder and
``heron.bench.git_commit`` asks git instead.
"""

COMMIT = "$Format:%H$"
