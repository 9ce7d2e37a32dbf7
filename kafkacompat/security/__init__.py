"""Who a connection is (principal) and, later, how it authenticated and what it may do."""
