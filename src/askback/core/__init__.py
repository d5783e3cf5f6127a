"""The sans-IO core every askback product shares: questions and how answers are read (`questions`, `answers`),
what a client declared it can show (`capabilities`), the state a flow carries between rounds (`state`), the
handler's view of one run (`flow`), the decision a round ends in (`round`), and a client's round loop (`plan`).

Nothing here performs I/O or imports a database, HTTP or async-runtime library; a test enforces it. The server
kit, connected accounts and the agent runtime carry out what these modules decide.
"""
