"""A project's sealed secrets: the `kb.project_secrets` repository and `${NAME}` resolution
(`project_secrets`), and the envelope encryption under the operator's key
(`secrets_crypto`). Secret values never leave the server. May use postgres and config.
"""
