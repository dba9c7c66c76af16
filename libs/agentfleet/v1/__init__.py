"""Generated protobuf and gRPC code for agentfleet.v1 (`make proto`). Do not edit."""
