DROP TABLE kb.agent_definitions;
DROP TABLE kb.products;
