"""The test project's shop: orders, shipped by a workflow."""
