"""Health checking and server reflection answer standard gRPC clients on the admin socket.

Speaks raw protobuf bytes through grpcio (Debian's python3-grpcio has neither the health nor the
reflection stubs), exactly what grpcurl or grpc_health_probe send:
  grpc.health.v1.Health/Check {service: ""}                 -> {status: SERVING (1)}
  grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo {list_services: ""}
                                                            -> the names of every service
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import grpc


class StandardGrpcToolsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="kvo-std-", dir="/tmp")
        cls.daemon = subprocess.Popen(
            [os.environ["KVOFFLOADD"], "--backend=host", "--runtime_dir=" + cls.dir,
             "--metrics_address=", "--max_region_bytes=64MiB", "--log_level=warn"])
        admin = os.path.join(cls.dir, "admin.sock")
        deadline = time.monotonic() + 30
        while not os.path.exists(admin):
            if cls.daemon.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("kvoffloadd did not start")
            time.sleep(0.02)
        cls.admin = grpc.insecure_channel("unix:" + admin)
        cls.data = grpc.insecure_channel("unix:" + os.path.join(cls.dir, "kvoffload.sock"))

    @classmethod
    def tearDownClass(cls):
        cls.daemon.terminate()
        cls.daemon.wait(timeout=30)
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_health_check_is_serving(self):
        check = self.admin.unary_unary("/grpc.health.v1.Health/Check")
        self.assertEqual(check(b"", timeout=5), b"\x08\x01")  # status = SERVING

    def test_reflection_lists_the_services(self):
        for channel, wanted in ((self.admin, [b"kvoffload.v1.Admin", b"grpc.health.v1.Health"]),
                                (self.data, [b"kvoffload.v1.Engine", b"kvoffload.v1.Worker"])):
            info = channel.stream_stream(
                "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo")
            replies = list(info(iter([b"\x3a\x00"]), timeout=5))  # list_services: ""
            self.assertEqual(len(replies), 1)
            for name in wanted:
                self.assertIn(name, replies[0])

    def test_reflection_serves_the_proto_file(self):
        info = self.admin.stream_stream(
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo")
        symbol = b"kvoffload.v1.Admin"
        request = b"\x22" + bytes([len(symbol)]) + symbol  # file_containing_symbol
        replies = list(info(iter([request]), timeout=5))
        self.assertIn(b"kvoffload/v1/kvoffload.proto", replies[0])
        self.assertIn(b"DropEngineRequest", replies[0])


if __name__ == "__main__":
    unittest.main(verbosity=2)
