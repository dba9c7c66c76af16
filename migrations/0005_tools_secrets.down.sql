DROP TABLE kb.project_secrets;
DROP TABLE kb.mcp_servers;
