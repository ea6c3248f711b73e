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
# Until the router lands (`modelgate serve`), the image runs the simulated engine: a vLLM stand-in
# for clusters without GPUs.
EXPOSE 8000
ENTRYPOINT ["node", "dist/cli.js"]
CMD ["sim", "--host", "0.0.0.0", "--port", "8000"]
