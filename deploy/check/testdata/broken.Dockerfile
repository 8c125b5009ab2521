# Negative self-test: the Dockerfile lint must reject this file.
# expect: Unknown instruction: FORM
# expect: COPY --from=builder: no earlier stage has that name
# expect: Invalid containerPort: http
# expect: the final stage must switch to a non-root USER
FROM debian:bookworm-slim AS build
FORM debian:bookworm-slim
COPY --from=builder /build/bin/pagoda-worker /usr/local/bin/
EXPOSE http
ENTRYPOINT ["/usr/local/bin/pagoda-worker"]
