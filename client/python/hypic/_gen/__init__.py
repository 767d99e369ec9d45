"""Stubs generated from rpc/hypic.proto when the package is built (setup.py): hypic_pb2
(the messages) and hypic_pb2_grpc (the Cache service). Never edited, never committed."""
