"""The database, with no domain knowledge: pools, transactions and LISTEN/NOTIFY (`db`),
migrations, the embedded server used when DATABASE_URL is unset, dataclasses from rows,
named SQL statements, keyset page tokens and the statements every project-scoped table
shares. May use config, errors and observability; nothing above them.
"""
