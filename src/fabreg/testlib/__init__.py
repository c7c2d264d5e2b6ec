"""ReFrame building blocks for fabreg's checks (imports ReFrame; the review side must not)."""
