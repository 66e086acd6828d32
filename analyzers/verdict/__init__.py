"""The verdict (analyzers layer): one metrics object, named rules over it, a ranked result."""
