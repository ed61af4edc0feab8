"""What `sandstack diff --fail-on` can fail on, and so what an acceptance can accept (a leaf: the CLI's parser reads
it without loading the review)."""

CATEGORIES = ("security", "capacity", "disruption", "data-loss", "replace")
ALL = "all"  # an acceptance of every category
