// TSan suppression for tests that talk to the services over gRPC's in-process channel: that
// transport hands the serialized bytes of a message from the writing thread to the reading one
// through queues TSan cannot see, so protobuf's parse of a received message is reported racing
// the sender's serialization (seen in ServiceTest under --config=tsan). Only gRPC's receive path
// (CallOpRecvMessage, which parses into a message the reading thread alone owns) is suppressed;
// races in our code are still reported. Linked into in-process service tests only.
extern "C" const char* __tsan_default_suppressions() {
  return "race:grpc::internal::CallOpRecvMessage\n";
}
