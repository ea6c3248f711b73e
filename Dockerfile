# syntax=docker/dockerfile:1
# modelgate container image: docker build -t modelgate:0.1.0 .
# Not built in this project's CI (no Docker engine there). test/dockerfile.test.ts checks its
# properties, and .ci/run rehearses the build stage's commands and runs the pruned result.

FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# --ignore-scripts: the base image has Node 24 already, so the node@24 dev dependency (which fetches a
# second Node binary in its install script) and the lockfile fix-up are not needed here.
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY scripts/precompile-validators.mjs ./scripts/
# what `npm run build` does: compile, then the JSON-Schema validators ahead of time (src/api/schema-validator.ts)
RUN node node_modules/typescript/bin/tsc -p tsconfig.build.json \
 && node scripts/precompile-validators.mjs \
 && npm prune --omit=dev --no-audit --no-fund

FROM node:24-bookworm-slim
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
# the image's unprivileged "node" user; the files it runs stay root-owned and read-only to it
USER 1000:1000
# API on 8080, admin (/metrics, /livez, /readyz) on 9090. Mount the config and keys read-only.
EXPOSE 8080 9090
# Exec form: node is PID 1 and gets SIGTERM itself (modelgate drains on it). `docker run IMAGE sim
# --host 0.0.0.0` runs the simulated engine instead. `serve` re-executes itself in place (still PID 1)
# with the V8 flags its latency needs (src/runtime.ts), as it does however it is started.
ENTRYPOINT ["node", "dist/cli.js"]
CMD ["serve", "--config", "/etc/modelgate/config/modelgate.yaml"]
