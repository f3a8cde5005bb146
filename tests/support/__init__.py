"""Helpers shared by the test tiers: servers, processes, workflow copies, paths."""
