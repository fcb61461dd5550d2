"""Generated messages and stubs of devplace/v1/devplace.proto (package ``devplace.v1``).

``devplace_pb2`` (messages, enums) and ``devplace_pb2_grpc`` (``DevicePlacementStub``) are written
at build time by protoc with Debian's grpc_python_plugin; see devplace.proto for every field's
units and values.
"""
