"""The experiment kinds of config/adaped.yaml (declared in fedrepro.papers.adaped.KINDS)."""
