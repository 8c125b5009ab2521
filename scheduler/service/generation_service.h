// GenerationService: the public pagoda.v1.Generation API.
//
// Generate validates and tokenizes on the handler thread, submits to the Engine, then streams
// what the engine pushes into the request's RequestStream, detokenizing incrementally. A client
// that cancels or disconnects is noticed within one poll interval and its request cancelled.
// Errors become gRPC statuses here and only here.
#pragma once

#include "absl/status/statusor.h"
#include "pagoda/v1/generation.grpc.pb.h"
#include "scheduler/service/engine.h"
#include "scheduler/service/served_model.h"

namespace pagoda::scheduler {

class GenerationService final : public pagoda::v1::Generation::Service {
 public:
  GenerationService(Engine* engine, const ServedModel* model);

  grpc::Status Generate(grpc::ServerContext* context, const pagoda::v1::GenerateRequest* request,
                        grpc::ServerWriter<pagoda::v1::GenerateResponse>* writer) override;
  grpc::Status Tokenize(grpc::ServerContext* context, const pagoda::v1::TokenizeRequest* request,
                        pagoda::v1::TokenizeResponse* response) override;
  grpc::Status GetModelInfo(grpc::ServerContext* context,
                            const pagoda::v1::GetModelInfoRequest* request,
                            pagoda::v1::ModelInfo* response) override;
  grpc::Status GetServerStatus(grpc::ServerContext* context,
                               const pagoda::v1::GetServerStatusRequest* request,
                               pagoda::v1::ServerStatus* response) override;

  // Turns a public request into the core's NewRequest: tokenizes, checks every field.
  absl::StatusOr<NewRequest> Validate(const pagoda::v1::GenerateRequest& request) const;

 private:
  grpc::Status Stream(grpc::ServerContext* context, const NewRequest& request,
                      const pagoda::v1::GenerateRequest& proto,
                      std::shared_ptr<RequestStream> stream,
                      grpc::ServerWriter<pagoda::v1::GenerateResponse>* writer);
  // Logs the request's completion line and maps its finish reason to the stream's status.
  grpc::Status FinalStatus(const NewRequest& request, const std::string& client_id, const Event& e);

  Engine* engine_;
  const ServedModel* model_;
};

}  // namespace pagoda::scheduler
