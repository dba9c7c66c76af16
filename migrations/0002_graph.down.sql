DROP TABLE kb.graph_relationships;
DROP TABLE kb.graph_objects;
