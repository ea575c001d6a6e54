"""The contract both daemons share.

Protocol, config, token, clock, partition names, job loading, the coordinator client.
"""
