# modelgate container image. Build: docker build -t modelgate .
# Not built in this project's CI (no Docker engine there); see README "Container image".

FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npm run build && npm prune --omit=dev

FROM node:24-bookworm-slim
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build --chown=root:root /app/package.json ./
COPY --from=build --chown=root:root /app/node_modules ./node_modules
COPY --from=build --chown=root:root /app/dist ./dist
# the image's "node" user (uid 1000); files stay root-owned and read-only to it
USER 1000:1000
# API on 8080, admin (/metrics, /livez, /readyz) on 9090. Mount the config and keys files (read-only);
# `docker run IMAGE sim --host 0.0.0.0` runs the simulated engine instead.
EXPOSE 8080 9090
ENTRYPOINT ["node", "dist/cli.js"]
CMD ["serve", "--config", "/etc/modelgate/config.yaml"]
