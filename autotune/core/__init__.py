"""The vocabulary every layer imports: routines, families and their typed problems, plans, assumptions, workloads."""
