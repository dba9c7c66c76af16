DROP TABLE kb.api_tokens;
